-- expect: SQLError
-- match: exactly one
SELECT COUNT(*) FROM students; DROP TABLE students
