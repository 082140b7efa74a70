/* tests/unit/cmocka_all.h - the includes cmocka needs, in the order it needs them. */
#ifndef COMEM_TESTS_CMOCKA_ALL_H
#define COMEM_TESTS_CMOCKA_ALL_H
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#endif
