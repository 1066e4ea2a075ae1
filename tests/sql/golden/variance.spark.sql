WITH __l1 AS (
  SELECT
    __u,
    count(*) AS __n,
    count(__v0) AS __c0,
    CAST(least(
      greatest(coalesce(sum(CAST(__v0 AS DECIMAL(38, 0))), 0), -4611686018427387903),
      4611686018427387903
    ) AS BIGINT) AS __s0,
    CAST(least(
      greatest(coalesce(sum(CAST(__v1 AS DECIMAL(38, 0))), 0), -4611686018427387903),
      4611686018427387903
    ) AS BIGINT) AS __s1
  FROM (
    SELECT
      __t.`uid` AS __u,
      (
        CASE
          WHEN CAST(__t.`v` AS DOUBLE) IS NULL OR isnan(CAST(__t.`v` AS DOUBLE))
          THEN NULL
          ELSE least(
            greatest(
              CAST(round(
                least(greatest(CAST(__t.`v` AS DOUBLE), CAST('0.0' AS DOUBLE)), CAST('20.0' AS DOUBLE)) * CAST('67108864.0' AS DOUBLE)
              ) AS BIGINT),
              0
            ),
            1342177280
          )
        END
      ) AS __v0,
      CAST(round(
        (
          (
            (
              CASE
                WHEN CAST(__t.`v` AS DOUBLE) IS NULL OR isnan(CAST(__t.`v` AS DOUBLE))
                THEN NULL
                ELSE least(greatest(CAST(__t.`v` AS DOUBLE), CAST('0.0' AS DOUBLE)), CAST('20.0' AS DOUBLE))
              END
            ) - CAST('10.0' AS DOUBLE)
          ) * (
            (
              CASE
                WHEN CAST(__t.`v` AS DOUBLE) IS NULL OR isnan(CAST(__t.`v` AS DOUBLE))
                THEN NULL
                ELSE least(greatest(CAST(__t.`v` AS DOUBLE), CAST('0.0' AS DOUBLE)), CAST('20.0' AS DOUBLE))
              END
            ) - CAST('10.0' AS DOUBLE)
          )
        ) * CAST('4194304.0' AS DOUBLE)
      ) AS BIGINT) AS __v1
    FROM `__deniable_0` AS __t
    WHERE
      __t.`uid` IS NOT NULL
  ) AS __r
  GROUP BY
    __u
), __capped AS (
  SELECT
    *
  FROM __l1
), __totals AS (
  SELECT
    __u,
    __n,
    __c0,
    __s0,
    __s1
  FROM __capped
), __kept AS (
  SELECT
    __u,
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
      3
    ) AS BIGINT) AS __x0,
    CAST(least(
      greatest(
        CASE
          WHEN __n > 3
          THEN CASE
            WHEN (
              __y1 * 3
            ) >= 0
            THEN (
              2 * (
                __y1 * 3
              ) + __n
            ) DIV (
              2 * __n
            )
            ELSE -(
              (
                __n - 2 * (
                  __y1 * 3
                )
              ) DIV (
                2 * __n
              )
            )
          END
          ELSE __y1
        END,
        -2013265920
      ),
      2013265920
    ) AS BIGINT) AS __x1,
    CAST(least(
      greatest(
        CASE
          WHEN __n > 3
          THEN CASE
            WHEN (
              __y2 * 3
            ) >= 0
            THEN (
              2 * (
                __y2 * 3
              ) + __n
            ) DIV (
              2 * __n
            )
            ELSE -(
              (
                __n - 2 * (
                  __y2 * 3
                )
              ) DIV (
                2 * __n
              )
            )
          END
          ELSE __y2
        END,
        0
      ),
      1258291200
    ) AS BIGINT) AS __x2
  FROM (
    SELECT
      __u,
      __n,
      CAST(__c0 AS DECIMAL(38, 0)) AS __y0,
      (
        CAST(__s0 AS DECIMAL(38, 0)) - 671088640 * CAST(__c0 AS DECIMAL(38, 0))
      ) AS __y1,
      CAST(__s1 AS DECIMAL(38, 0)) AS __y2
    FROM __totals
  ) AS __w
)
SELECT
  0 AS __part,
  CAST(count(*) AS BIGINT) AS __units,
  CAST(least(
    greatest(coalesce(sum(CAST(__x0 AS DECIMAL(38, 0))), 0), -4611686018427387903),
    4611686018427387903
  ) AS BIGINT) AS __m_m0,
  CAST(least(
    greatest(coalesce(sum(CAST(__x1 AS DECIMAL(38, 0))), 0), -4611686018427387903),
    4611686018427387903
  ) AS BIGINT) AS __m_m1,
  CAST(least(
    greatest(coalesce(sum(CAST(__x2 AS DECIMAL(38, 0))), 0), -4611686018427387903),
    4611686018427387903
  ) AS BIGINT) AS __m_m2,
  CAST(NULL AS BIGINT) AS __bin,
  CAST(NULL AS BIGINT) AS __count
FROM __kept
