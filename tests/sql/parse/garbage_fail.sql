-- expect: SQLError
SELEKT COUNT(*) FROM students
