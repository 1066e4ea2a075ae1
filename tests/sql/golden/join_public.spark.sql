WITH __l1 AS (
  SELECT
    __u,
    __k0,
    count(*) AS __n,
    CAST(least(
      greatest(coalesce(sum(CAST(__v0 AS DECIMAL(38, 0))), 0), -4611686018427387903),
      4611686018427387903
    ) AS BIGINT) AS __s0
  FROM (
    SELECT
      __t.`uid` AS __u,
      (
        __j1.`label`
      ) AS __k0,
      (
        CASE
          WHEN CAST(__t.`v` AS DOUBLE) IS NULL OR isnan(CAST(__t.`v` AS DOUBLE))
          THEN NULL
          ELSE least(
            greatest(
              CAST(round(
                least(greatest(CAST(__t.`v` AS DOUBLE), CAST('0.0' AS DOUBLE)), CAST('20.0' AS DOUBLE)) * CAST('16777216.0' AS DOUBLE)
              ) AS BIGINT),
              0
            ),
            335544320
          )
        END
      ) AS __v0
    FROM `__deniable_0` AS __t
      INNER JOIN `__deniable_copy_4` AS __j1
        ON __t.`g` = __j1.`g`
    WHERE
      (
        __j1.`label`
      ) IS NOT NULL AND __t.`uid` IS NOT NULL
  ) AS __r
  GROUP BY
    __u,
    __k0
), __capped AS (
  SELECT
    *
  FROM __l1
), __totals AS (
  SELECT
    __u,
    __k0,
    __n,
    __s0
  FROM __capped
), __kept AS (
  SELECT
    __u,
    __k0,
    least(__n, 3) AS __n,
    CAST(least(
      greatest(
        CASE
          WHEN __n > 3
          THEN CASE
            WHEN (
              __y0 * 3
            ) >= 0
            THEN (
              2 * (
                __y0 * 3
              ) + __n
            ) DIV (
              2 * __n
            )
            ELSE -(
              (
                __n - 2 * (
                  __y0 * 3
                )
              ) DIV (
                2 * __n
              )
            )
          END
          ELSE __y0
        END,
        0
      ),
      1006632960
    ) AS BIGINT) AS __x0
  FROM (
    SELECT
      __u,
      __k0,
      __n,
      CAST(__s0 AS DECIMAL(38, 0)) AS __y0
    FROM __totals
  ) AS __w
)
SELECT
  0 AS __part,
  __k0,
  CAST(count(*) AS BIGINT) AS __units,
  CAST(least(
    greatest(coalesce(sum(CAST(__n AS DECIMAL(38, 0))), 0), -4611686018427387903),
    4611686018427387903
  ) AS BIGINT) AS __m_m0,
  CAST(least(
    greatest(coalesce(sum(CAST(__x0 AS DECIMAL(38, 0))), 0), -4611686018427387903),
    4611686018427387903
  ) AS BIGINT) AS __m_m1,
  CAST(NULL AS BIGINT) AS __bin,
  CAST(NULL AS BIGINT) AS __count
FROM __kept
GROUP BY
  __k0
