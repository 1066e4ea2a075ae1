-- expect: UnsafeQuery
ATTACH 'other.db' AS other
