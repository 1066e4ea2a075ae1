-- expect: UnsafeQuery
-- match: needs clamping bounds
SELECT AVG(birth_year) FROM students
