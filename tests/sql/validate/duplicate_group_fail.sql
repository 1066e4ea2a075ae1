-- expect: UnsafeQuery
SELECT editor, COUNT(*) FROM students GROUP BY editor, editor
