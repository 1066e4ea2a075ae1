-- expect: UnsafeQuery
-- match: privacy unit
SELECT COUNT(*) FROM students AS s JOIN marks AS m ON s.editor = m.module
