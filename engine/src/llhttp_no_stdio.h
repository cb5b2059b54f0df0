/* Force-included when compiling llhttp's C sources into the engine. llhttp's api.c defines a
 * debug hook, llhttp__debug(), that prints with fprintf(stderr, ...); it is only called when
 * llhttp is generated with LLHTTP_DEBUG, which Debian's build is not. The engine does no I/O
 * (the purity gate checks its symbols), so the hook is compiled to nothing. */
#include <stdio.h>
#define fprintf(...) ((void)0)
