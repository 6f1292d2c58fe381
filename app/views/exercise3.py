from app.exercises import exercise, grading_panel3

exercise.render("exercise3", grading_panel3.render, leaks=True)
