-- expect: UnsafeQuery
-- match: WITH
WITH s AS (SELECT * FROM students) SELECT COUNT(*) FROM s
