/* The test hook behind TC_CRASH_POINT (src/base/crashpoint.h). */

#include "src/base/crashpoint.h"

#ifdef TC_CRASHPOINTS
crashpoint_fn crashpoint_hook;
#endif
