import time
