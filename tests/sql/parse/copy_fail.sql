-- expect: UnsafeQuery
COPY students TO '/tmp/out.csv'
