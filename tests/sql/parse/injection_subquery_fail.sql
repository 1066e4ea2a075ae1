-- expect: UnsafeQuery
-- options: {"epsilon": 1}
SELECT COUNT(*) FROM students WHERE editor = (SELECT current_setting('threads'))
