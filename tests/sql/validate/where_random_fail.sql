-- expect: UnsafeQuery
-- match: not allowed
SELECT COUNT(*) FROM students WHERE random() < 0.5
