from app import exercise

exercise.render("exercise3", leaks=True)
