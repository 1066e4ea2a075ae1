-- expect: UnsafeQuery
-- match: needs clamping bounds
SELECT SUM(birth_year) FROM students
