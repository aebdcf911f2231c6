/* The configuration file parser on arbitrary bytes. */
#include <cjson/cJSON.h>
#include <stdlib.h>

#include "fuzz.h"
#include "spot/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct config c;
    char err[1024];

    if (config_init(&c) < 0)
        return 0;
    if (config_load_json(&c, "fuzz.json", (const char *)data, size, err, sizeof(err)) == 0) {
        cJSON *j = config_to_json(&c);
        char *text = cJSON_PrintUnformatted(j);
        if (!text)
            abort();
        free(text);
        cJSON_Delete(j);
        config_check_implemented(&c, err, sizeof(err));
    } else if (err[0] == '\0') {
        abort(); /* every refusal must say why */
    }
    config_release(&c);
    return 0;
}
