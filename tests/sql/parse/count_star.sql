SELECT COUNT(*) FROM students
