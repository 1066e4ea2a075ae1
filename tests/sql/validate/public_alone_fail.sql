-- expect: UnsafeQuery
-- match: public table
SELECT COUNT(*) FROM editors_public
