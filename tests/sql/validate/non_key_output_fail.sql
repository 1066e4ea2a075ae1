-- expect: UnsafeQuery
-- match: neither a GROUP BY key nor inside an aggregate
SELECT editor, gender, COUNT(*) FROM students GROUP BY editor
