-- expect: UnsafeQuery
PRAGMA database_list
