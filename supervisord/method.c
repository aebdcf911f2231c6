/* method: the table of methods, by name (method.h).  Each method is its
 * own file; this one only knows their names. */
#include "method.h"

#include <string.h>

const struct method_ops *method_find(const char *name)
{
    static const struct method_ops *const all[] = { &method_app, &method_signal, &method_dir,
                                                    &method_criu };

    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (strcmp(all[i]->name, name) == 0)
            return all[i];
    return NULL;
}
