-- expect: UnsafeQuery
-- match: no aggregate and no GROUP BY
SELECT 1 AS one FROM students
