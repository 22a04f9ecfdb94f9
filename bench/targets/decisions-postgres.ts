import type { TargetModule } from '../lib/types.js';
import { startDecisions } from './decisions.js';

const target: TargetModule = { start: () => startDecisions('postgres') };
export default target;
