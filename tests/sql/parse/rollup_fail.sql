-- expect: UnsafeQuery
SELECT editor, COUNT(*) FROM students GROUP BY ROLLUP (editor)
