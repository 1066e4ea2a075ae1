-- expect: UnsafeQuery
-- match: HAVING
SELECT editor, COUNT(*) FROM students GROUP BY editor HAVING COUNT(*) > 5
