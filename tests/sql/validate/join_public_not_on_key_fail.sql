-- expect: UnsafeQuery
-- match: unique key
SELECT COUNT(*) FROM students AS s JOIN editors_public AS e ON s.gender = e.kind
