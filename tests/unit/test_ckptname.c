#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "spot/ckptname.h"

TEST(ckptname_step)
{
    static const struct {
        const char *name;
        bool dir;
        enum ckpt_layout layout;
        int64_t step;
        enum ckptname_why why;
    } cases[] = {
        /* As trainers write them. */
        { "checkpoint-150", true, CKPT_LAYOUT_AUTO, 150, CKPTNAME_OK },     /* Hugging Face */
        { "step-150", true, CKPT_LAYOUT_FOLDERS, 150, CKPTNAME_OK },        /* torchtitan, DCP */
        { "global_step150", true, CKPT_LAYOUT_AUTO, 150, CKPTNAME_OK },     /* DeepSpeed */
        { "ckpt-000150.pt", false, CKPT_LAYOUT_AUTO, 150, CKPTNAME_OK },
        { "model_150.pth", false, CKPT_LAYOUT_FILES, 150, CKPTNAME_OK },
        { "epoch=3-step=150.ckpt", false, CKPT_LAYOUT_AUTO, 150, CKPTNAME_OK }, /* Lightning */
        { "epoch=3.ckpt", false, CKPT_LAYOUT_AUTO, 3, CKPTNAME_OK },
        { "model.v2-step_7.safetensors", false, CKPT_LAYOUT_AUTO, 7, CKPTNAME_OK },
        { "run3_steps_40.pt", false, CKPT_LAYOUT_AUTO, 40, CKPTNAME_OK },
        { "0", true, CKPT_LAYOUT_AUTO, 0, CKPTNAME_OK },
        /* The extension is no step; a folder has none. */
        { "model.pt2", false, CKPT_LAYOUT_AUTO, -1, CKPTNAME_NO_STEP },
        { "ckpt.v2", true, CKPT_LAYOUT_AUTO, 2, CKPTNAME_OK },
        /* Not (yet) checkpoints. */
        { "tmp-checkpoint-150", true, CKPT_LAYOUT_AUTO, -1, CKPTNAME_TEMPORARY },
        { "ckpt-150.pt.tmp", false, CKPT_LAYOUT_AUTO, -1, CKPTNAME_TEMPORARY },
        { ".ckpt-150.pt", false, CKPT_LAYOUT_AUTO, -1, CKPTNAME_TEMPORARY },
        { "ckpt-150.pt~", false, CKPT_LAYOUT_AUTO, -1, CKPTNAME_TEMPORARY },
        { "ckpt-150.pt.part", false, CKPT_LAYOUT_AUTO, -1, CKPTNAME_TEMPORARY },
        /* A fixed name: no step in it, under any layout of files. */
        { "last.pt", false, CKPT_LAYOUT_AUTO, -1, CKPTNAME_FIXED },
        { "last.ckpt", false, CKPT_LAYOUT_FIXED, -1, CKPTNAME_FIXED },   /* Lightning */
        { "latest.pth", false, CKPT_LAYOUT_FILES, -1, CKPTNAME_FIXED },
        { "last.pt.tmp", false, CKPT_LAYOUT_FIXED, -1, CKPTNAME_TEMPORARY },
        { "ckpt-150.pt", false, CKPT_LAYOUT_FIXED, -1, CKPTNAME_KIND },
        { "last", true, CKPT_LAYOUT_FIXED, -1, CKPTNAME_KIND },
        { "latest", false, CKPT_LAYOUT_AUTO, -1, CKPTNAME_NO_STEP },      /* DeepSpeed's pointer */
        { "lastly.pt", false, CKPT_LAYOUT_AUTO, -1, CKPTNAME_NO_STEP },
        { "model.pt", false, CKPT_LAYOUT_AUTO, -1, CKPTNAME_NO_STEP },
        { "runs", true, CKPT_LAYOUT_AUTO, -1, CKPTNAME_NO_STEP },
        { "checkpoint-150", true, CKPT_LAYOUT_FILES, -1, CKPTNAME_KIND },
        { "ckpt-150.pt", false, CKPT_LAYOUT_FOLDERS, -1, CKPTNAME_KIND },
        /* Too many digits for a step. */
        { "ckpt-1234567890123456.pt", false, CKPT_LAYOUT_AUTO, -1, CKPTNAME_NO_STEP },
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        enum ckptname_why why = CKPTNAME_FIXED + 1;
        int64_t step = ckptname_step(cases[i].name, cases[i].dir, cases[i].layout, &why);

        if (step != cases[i].step || why != cases[i].why)
            printf("  case '%s'\n", cases[i].name);
        CHECK_INT(step, cases[i].step);
        CHECK_INT(why, cases[i].why);
    }
    CHECK(ckptname_step("x", false, CKPT_LAYOUT_AUTO, NULL) == -1);
}

/* A step file's text: what trainers write beside a fixed name. */
TEST(ckptname_text_step)
{
    static const struct {
        const char *text;
        int64_t step;
    } cases[] = {
        { "150\n", 150 },
        { "global_step150", 150 },                          /* DeepSpeed's latest */
        { "{\"global_step\": 150, \"epoch\": 3}", 150 },
        { "{'step': 7}", 7 },
        { "step=42 loss=0.5", 42 },
        { "epoch 3", 3 },
        { "", -1 },
        { "none\n", -1 },
        { "1234567890123456", -1 },
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t step = ckptname_text_step(cases[i].text, strlen(cases[i].text));

        if (step != cases[i].step)
            printf("  case '%s'\n", cases[i].text);
        CHECK_INT(step, cases[i].step);
    }
    CHECK(ckptname_fixed("last.ckpt") && ckptname_fixed("latest.pt"));
    CHECK(!ckptname_fixed("last") && !ckptname_fixed(".pt") && !ckptname_fixed("blast.pt"));
}

TEST(ckptname_layout)
{
    enum ckpt_layout l = CKPT_LAYOUT_FILES;

    CHECK_INT(ckptname_layout("auto", &l), 0);
    CHECK_INT(l, CKPT_LAYOUT_AUTO);
    CHECK_INT(ckptname_layout("folders", &l), 0);
    CHECK_INT(l, CKPT_LAYOUT_FOLDERS);
    CHECK_STR(ckptname_layout_name(l), "folders");
    CHECK_INT(ckptname_layout("Files", &l), -EINVAL);
    CHECK_INT(ckptname_layout(NULL, &l), -EINVAL);
    CHECK(ckptname_last_file("trainer_state.json"));
    CHECK(ckptname_last_file(".metadata"));
    CHECK(ckptname_last_file(".spotd-complete"));
    CHECK(!ckptname_last_file("model.safetensors"));
}
