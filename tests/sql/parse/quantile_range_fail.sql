-- expect: UnsafeQuery
-- match: between 0 and 1
SELECT QUANTILE(scholarship, 1.5) FROM students
