-- expect: UnsafeQuery
-- match: bounds
SELECT SUM(scholarship * birth_year) FROM students
