WITH __l1 AS (
  SELECT
    __u,
    count(*) AS __n,
    CAST(least(
      greatest(coalesce(sum(coalesce(__v0 * 32768 + 1, 0)), 0), -4611686018427387903),
      4611686018427387903
    ) AS BIGINT) AS __p0
  FROM (
    SELECT
      __t."uid" AS __u,
      (
        CASE
          WHEN CAST(__t."v" AS DOUBLE PRECISION) IS NULL
          OR CAST(__t."v" AS DOUBLE PRECISION) = CAST('NaN' AS DOUBLE PRECISION)
          THEN NULL
          ELSE least(
            greatest(
              CAST(round(
                least(
                  greatest(CAST(__t."v" AS DOUBLE PRECISION), CAST('0.0' AS DOUBLE PRECISION)),
                  CAST('20.0' AS DOUBLE PRECISION)
                ) * CAST('67108864.0' AS DOUBLE PRECISION)
              ) AS BIGINT),
              0
            ),
            1342177280
          )
        END
      ) AS __v0
    FROM "__deniable_0" AS __t
    WHERE
      __t."uid" IS NOT NULL
  ) AS __r
  GROUP BY
    __u
), __capped AS (
  SELECT
    *
  FROM __l1
), __giant AS (
  SELECT
    __u,
    __n
  FROM __capped
  WHERE
    __n >= 32768
), __grows AS (
  SELECT
    __t."uid" AS __u,
    (
      CASE
        WHEN CAST(__t."v" AS DOUBLE PRECISION) IS NULL
        OR CAST(__t."v" AS DOUBLE PRECISION) = CAST('NaN' AS DOUBLE PRECISION)
        THEN NULL
        ELSE least(
          greatest(
            CAST(round(
              least(
                greatest(CAST(__t."v" AS DOUBLE PRECISION), CAST('0.0' AS DOUBLE PRECISION)),
                CAST('20.0' AS DOUBLE PRECISION)
              ) * CAST('67108864.0' AS DOUBLE PRECISION)
            ) AS BIGINT),
            0
          ),
          1342177280
        )
      END
    ) AS __v0
  FROM "__deniable_0" AS __t
  WHERE
    __t."uid" IS NOT NULL
    AND EXISTS(
      SELECT
        1
      FROM __giant AS __r
      WHERE
        __t."uid" IS NOT DISTINCT FROM __r.__u
    )
), __gl1 AS (
  SELECT
    __u,
    count(*) AS __n,
    CAST(least(greatest(coalesce(sum(__v0), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __s0,
    count(__v0) AS __c0
  FROM __grows
  GROUP BY
    __u
), __totals AS (
  SELECT
    __u,
    __n,
    (
      __p0 >> 15
    ) AS __s0,
    (
      __p0 & 32767
    ) AS __c0
  FROM __capped
  WHERE
    NOT __n >= 32768
  UNION ALL
  SELECT
    __g.__u,
    __c.__n,
    __g.__s0,
    __g.__c0
  FROM __gl1 AS __g
  INNER JOIN __giant AS __c
    ON __g.__u IS NOT DISTINCT FROM __c.__u
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
            THEN div((
              2 * (
                __y0 * 3
              ) + __n
            ), (
              2 * __n
            ))
            ELSE -(
              div((
                __n - 2 * (
                  __y0 * 3
                )
              ), (
                2 * __n
              ))
            )
          END
          ELSE __y0
        END,
        0
      ),
      4026531840
    ) AS BIGINT) AS __x0,
    CAST(least(
      greatest(
        CASE
          WHEN __n > 3
          THEN CASE
            WHEN (
              __y1 * 3
            ) >= 0
            THEN div((
              2 * (
                __y1 * 3
              ) + __n
            ), (
              2 * __n
            ))
            ELSE -(
              div((
                __n - 2 * (
                  __y1 * 3
                )
              ), (
                2 * __n
              ))
            )
          END
          ELSE __y1
        END,
        0
      ),
      3
    ) AS BIGINT) AS __x1,
    CAST(least(
      greatest(
        CASE
          WHEN __n > 3
          THEN CASE
            WHEN (
              __y2 * 3
            ) >= 0
            THEN div((
              2 * (
                __y2 * 3
              ) + __n
            ), (
              2 * __n
            ))
            ELSE -(
              div((
                __n - 2 * (
                  __y2 * 3
                )
              ), (
                2 * __n
              ))
            )
          END
          ELSE __y2
        END,
        -2013265920
      ),
      2013265920
    ) AS BIGINT) AS __x2
  FROM (
    SELECT
      __u,
      __n,
      CAST(__s0 AS DECIMAL(38, 0)) AS __y0,
      CAST(__c0 AS DECIMAL(38, 0)) AS __y1,
      (
        CAST(__s0 AS DECIMAL(38, 0)) - 671088640 * CAST(__c0 AS DECIMAL(38, 0))
      ) AS __y2
    FROM __totals
  ) AS __w
)
SELECT
  0 AS __part,
  CAST(count(*) AS BIGINT) AS __units,
  CAST(least(greatest(coalesce(sum(__x0), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __m_m0,
  CAST(least(greatest(coalesce(sum(__x1), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __m_m1,
  CAST(least(greatest(coalesce(sum(__x2), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __m_m2,
  CAST(NULL AS BIGINT) AS __bin,
  CAST(NULL AS BIGINT) AS __count
FROM __kept
