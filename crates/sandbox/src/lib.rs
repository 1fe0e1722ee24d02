//! Running processes in a box on Linux: namespaces, the box's root filesystem, PID 1, PTYs.
