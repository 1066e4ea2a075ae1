-- expect: SQLError
-- match: unknown column 'nope'.*line 4, column 7
SELECT COUNT(*) FROM students
WHERE nope = 1
