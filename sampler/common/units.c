#include "common/units.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int parse_number(const char *text, double *value, const char **rest)
{
    if (!text || !*text || *text == '-' || *text == '+' || *text == ' ')
        return -1;
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || errno || !isfinite(v) || v < 0)
        return -1;
    *value = v;
    *rest = end;
    return 0;
}

int kp_parse_duration(const char *text, uint64_t *us)
{
    double v;
    const char *unit;
    if (parse_number(text, &v, &unit) != 0)
        return -1;
    double scale;
    if (!*unit || strcmp(unit, "s") == 0)
        scale = 1e6;
    else if (strcmp(unit, "ms") == 0)
        scale = 1e3;
    else if (strcmp(unit, "us") == 0)
        scale = 1;
    else if (strcmp(unit, "m") == 0 || strcmp(unit, "min") == 0)
        scale = 60e6;
    else if (strcmp(unit, "h") == 0)
        scale = 3600e6;
    else
        return -1;
    double r = v * scale;
    if (r < 1 || r > 1e15)
        return -1;
    *us = (uint64_t)r;
    return 0;
}

int kp_parse_size(const char *text, uint64_t *bytes)
{
    double v;
    const char *unit;
    if (parse_number(text, &v, &unit) != 0)
        return -1;
    double scale = 1;
    if (*unit == 'K' || *unit == 'k')
        scale = 1024.0, unit++;
    else if (*unit == 'M')
        scale = 1024.0 * 1024, unit++;
    else if (*unit == 'G')
        scale = 1024.0 * 1024 * 1024, unit++;
    if (*unit == 'B' || *unit == 'b')
        unit++;
    if (*unit)
        return -1;
    double r = v * scale;
    if (r < 1 || r > 1e18)
        return -1;
    *bytes = (uint64_t)r;
    return 0;
}

int kp_parse_uint(const char *text, uint64_t min, uint64_t max, uint64_t *value)
{
    if (!text || !*text)
        return -1;
    for (const char *p = text; *p; p++)
        if (*p < '0' || *p > '9')
            return -1;
    errno = 0;
    unsigned long long v = strtoull(text, NULL, 10);
    if (errno || v < min || v > max)
        return -1;
    *value = v;
    return 0;
}

int kp_parse_rate(const char *text, double max, double *value)
{
    double v;
    const char *rest;
    if (parse_number(text, &v, &rest) != 0 || *rest || v <= 0 || v > max)
        return -1;
    *value = v;
    return 0;
}
