-- expect: UnsafeQuery
-- match: aggregates
SELECT COUNT(*) FROM (SELECT editor, COUNT(*) AS n FROM students GROUP BY editor) AS t
