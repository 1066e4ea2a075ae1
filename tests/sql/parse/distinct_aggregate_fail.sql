-- expect: UnsafeQuery
-- match: DISTINCT
SELECT DISTINCT editor, COUNT(*) FROM students GROUP BY editor
