-- expect: UnsafeQuery
-- match: used twice
SELECT COUNT(*) AS n, SUM(scholarship) AS n FROM students
