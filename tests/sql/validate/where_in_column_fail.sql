-- expect: UnsafeQuery
-- match: literals
SELECT COUNT(*) FROM students WHERE editor IN (gender, department)
