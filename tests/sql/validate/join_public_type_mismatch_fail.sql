-- expect: UnsafeQuery
-- match: same type
SELECT COUNT(*) FROM students AS s JOIN editors_public AS e ON s.birth_year = e.editor
