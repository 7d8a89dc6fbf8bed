#include <zmq.h>
int d2k_uses_zmq() { return ZMQ_VERSION_MAJOR; }
