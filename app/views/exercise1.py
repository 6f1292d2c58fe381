from app.exercises import exercise, grading_panel1

exercise.render("exercise1", grading_panel1.render)
