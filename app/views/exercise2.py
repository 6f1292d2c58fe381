from app import exercise

exercise.render("exercise2")
