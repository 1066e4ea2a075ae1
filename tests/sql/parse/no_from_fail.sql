-- expect: UnsafeQuery
-- match: FROM
SELECT 1
