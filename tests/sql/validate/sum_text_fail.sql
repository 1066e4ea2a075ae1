-- expect: UnsafeQuery
-- match: numeric column
SELECT SUM(editor) FROM students
