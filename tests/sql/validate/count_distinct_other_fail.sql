-- expect: UnsafeQuery
-- match: privacy unit
SELECT COUNT(DISTINCT editor) FROM students
