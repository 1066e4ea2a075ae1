-- expect: InvalidParameter
-- match: delta
-- options: {"epsilon": 1, "delta": 1e-6}
SELECT editor, COUNT(*) FROM students GROUP BY editor
