-- expect: SQLError
-- match: unknown table or alias
SELECT COUNT(*) FROM students AS s WHERE t.gender = 'x'
