-- expect: UnsafeQuery
UPDATE students SET scholarship = 0
