-- expect: UnsafeQuery
-- match: no aggregate
SELECT editor FROM students GROUP BY editor
