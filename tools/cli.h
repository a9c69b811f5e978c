/* cli.h - subcommands of the `tgrad` program (layer 6: uses only the public headers). */
#ifndef TG_CLI_H
#define TG_CLI_H

int cmd_gradcheck(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_bench(int argc, char **argv);

#endif
