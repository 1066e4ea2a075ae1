-- expect: SQLError
-- match: exactly one
SELECT COUNT(*) FROM students; SELECT COUNT(*) FROM students
