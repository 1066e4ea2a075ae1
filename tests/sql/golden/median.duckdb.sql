WITH __rows AS (
  SELECT
    __t."uid" AS __u,
    __t."g" AS __k0,
    (
      CASE
        WHEN CAST(round(
          (
            (
              CASE
                WHEN CAST(__t."v" AS DOUBLE) IS NULL OR isnan(CAST(__t."v" AS DOUBLE))
                THEN NULL
                ELSE least(greatest(CAST(__t."v" AS DOUBLE), CAST('0.0' AS DOUBLE)), CAST('20.0' AS DOUBLE))
              END
            ) - CAST('0.0' AS DOUBLE)
          ) * CAST('50.0' AS DOUBLE)
        ) AS BIGINT) IS NULL
        THEN NULL
        ELSE least(
          greatest(
            CAST(round(
              (
                (
                  CASE
                    WHEN CAST(__t."v" AS DOUBLE) IS NULL OR isnan(CAST(__t."v" AS DOUBLE))
                    THEN NULL
                    ELSE least(greatest(CAST(__t."v" AS DOUBLE), CAST('0.0' AS DOUBLE)), CAST('20.0' AS DOUBLE))
                  END
                ) - CAST('0.0' AS DOUBLE)
              ) * CAST('50.0' AS DOUBLE)
            ) AS BIGINT),
            0
          ),
          1000
        )
      END
    ) AS __v0
  FROM "__deniable_0" AS __t
  WHERE
    (
      __t."g" IN ('x', 'y') OR __t."g" IS NULL
    ) AND __t."uid" IS NOT NULL
), __ranked AS (
  SELECT
    *,
    row_number() OVER (
      PARTITION BY __u, __k0
      ORDER BY hash(xor(hash(xor(hash(xor(CAST(1 AS UBIGINT), hash(__u))), hash(__k0))), hash(__v0))), __v0
    ) AS __rn
  FROM __rows
), __rkept AS (
  SELECT
    __u,
    __k0,
    __v0
  FROM __ranked
  WHERE
    __rn <= 3 AND __rn > 0
), __parts AS (
  SELECT
    __u,
    __k0,
    row_number() OVER (
      PARTITION BY __u
      ORDER BY hash(xor(hash(xor(CAST(2 AS UBIGINT), hash(__u))), hash(__k0))), __k0
    ) AS __pr
  FROM (
    SELECT DISTINCT
      __u,
      __k0
    FROM __rkept
  ) AS __d
), __pkept AS (
  SELECT
    *
  FROM __parts
  WHERE
    __pr <= 2 AND __pr > 0
), __bounded AS (
  SELECT
    __l.*
  FROM __rkept AS __l
  SEMI JOIN __pkept AS __r
    ON __l.__u IS NOT DISTINCT FROM __r.__u AND __l.__k0 IS NOT DISTINCT FROM __r.__k0
), __kept AS (
  SELECT
    __u,
    __k0,
    count(*) AS __n
  FROM __bounded
  GROUP BY
    __u,
    __k0
)
SELECT
  0 AS __part,
  __k0,
  CAST(count(*) AS BIGINT) AS __units,
  CAST(NULL AS BIGINT) AS __bin,
  CAST(NULL AS BIGINT) AS __count
FROM __kept
GROUP BY
  __k0
UNION ALL
SELECT
  1 AS __part,
  __k0,
  CAST(NULL AS BIGINT) AS __units,
  CAST(__v0 AS BIGINT) AS __bin,
  CAST(count(*) AS BIGINT) AS __count
FROM __bounded
WHERE
  __v0 IS NOT NULL
GROUP BY
  __k0,
  __v0
