-- expect: BudgetExceeded
-- options: {"epsilon": 1000}
SELECT COUNT(*) FROM students
