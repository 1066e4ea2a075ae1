-- expect: UnsafeQuery
-- match: DISTINCT
SELECT DISTINCT editor FROM students
