/*
 * Extended-precision arithmetic for INCRBYFLOAT.
 *
 * Redis computes INCRBYFLOAT in C `long double` (the 80-bit x87 format on x86_64), parses with
 * strtold and prints with "%.17Lf". Rust has no such type, and every digit of the reply and of
 * the stored value depends on it, so this one operation is done in C. Pure: no IO, no globals
 * other than errno, deterministic for given inputs.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest text accepted as a long double (exclusive), and the size of the output buffer the
 * caller provides: Redis's MAX_LONG_DOUBLE_CHARS. */
#define LATTICE_LD_CHARS (5 * 1024)

/* Result codes shared with the Rust wrapper. */
#define LATTICE_LD_OK 0
#define LATTICE_LD_NOT_FLOAT 1
#define LATTICE_LD_NAN_OR_INF 2
#define LATTICE_LD_NO_ROOM 3

/* Parses the whole of `text[0..len)` as a long double: no leading space, nothing left over
 * (a NUL byte included), no NaN, and no overflow or total underflow. Returns 1 on success. */
static int lattice_parse_ld(const unsigned char *text, size_t len, long double *value) {
    char buf[LATTICE_LD_CHARS];
    char *rest;
    long double v;

    if (len == 0 || len >= sizeof(buf)) return 0;
    memcpy(buf, text, len);
    buf[len] = '\0';
    if (isspace((unsigned char)buf[0])) return 0;

    errno = 0;
    v = strtold(buf, &rest);
    /* All of it: a NUL byte inside the text does not end it early. */
    if (*rest != '\0' || (size_t)(rest - buf) != len) return 0;
    if (errno == ERANGE && (isinf(v) || v == 0.0L)) return 0;
    if (isnan(v)) return 0;
    *value = v;
    return 1;
}

/*
 * current (absent when has_current is 0, meaning 0) + increment, printed into `out` the way
 * INCRBYFLOAT stores it: fixed notation with 17 decimals, trailing zeros and a trailing point
 * removed, and "-0" written as "0".
 */
int lattice_incrbyfloat(const unsigned char *current, size_t current_len, int has_current,
                        const unsigned char *increment, size_t increment_len,
                        char *out, size_t out_cap, size_t *out_len) {
    long double sum = 0.0L;
    long double incr;
    int n;

    if (has_current && !lattice_parse_ld(current, current_len, &sum)) return LATTICE_LD_NOT_FLOAT;
    if (!lattice_parse_ld(increment, increment_len, &incr)) return LATTICE_LD_NOT_FLOAT;

    sum += incr;
    if (isnan(sum) || isinf(sum)) return LATTICE_LD_NAN_OR_INF;

    n = snprintf(out, out_cap, "%.17Lf", sum);
    if (n < 0 || (size_t)n + 1 > out_cap) return LATTICE_LD_NO_ROOM;

    if (memchr(out, '.', (size_t)n) != NULL) {
        while (n > 0 && out[n - 1] == '0') n--;
        if (n > 0 && out[n - 1] == '.') n--;
    }
    if (n == 2 && out[0] == '-' && out[1] == '0') {
        out[0] = '0';
        n = 1;
    }
    *out_len = (size_t)n;
    return LATTICE_LD_OK;
}
