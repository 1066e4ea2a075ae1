-- expect: SQLError
-- options: {"epsilon": 1}
SELECT COUNT(*) FROM students WHERE editor = 'a'; INSTALL httpfs; LOAD httpfs
