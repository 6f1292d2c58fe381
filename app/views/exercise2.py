from app.exercises import exercise, grading_panel2

exercise.render("exercise2", grading_panel2.render)
