-- expect: UnsafeQuery
-- match: needs clamping bounds
SELECT MEDIAN(birth_year) FROM students
