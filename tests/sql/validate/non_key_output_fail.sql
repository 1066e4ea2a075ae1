-- expect: UnsafeQuery
-- match: neither an aggregate nor a GROUP BY
SELECT editor, gender, COUNT(*) FROM students GROUP BY editor
